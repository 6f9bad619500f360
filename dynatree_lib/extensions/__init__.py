"""Our named extensions of the paper's methods: reported beside them, never in their place."""
