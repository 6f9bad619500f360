"""What a run is set up from: profiles, workloads and their splits, data and prompts, weights and model loading,
tiny models for tests, the variants a cell runs in. Imports nothing else of the harness."""
