"""replib.models: small models and their training loops, shared by several chapters."""
