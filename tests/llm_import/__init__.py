"""The decoder-with-past importer (frontend/decoder*.py) against Hugging Face exports."""
