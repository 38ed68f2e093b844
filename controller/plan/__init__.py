"""Backend-neutral per-switch intent, and the difference between two intents."""
