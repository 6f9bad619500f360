"""The DynaTree authors' code: its checkout, its runs on our pair, its records. Imports ``setup`` and ``measure``."""
