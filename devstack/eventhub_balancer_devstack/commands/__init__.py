"""The development commands (`ehb local|demo|bench|chart`), registered as entry points."""
