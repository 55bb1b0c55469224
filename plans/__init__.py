"""The shipped experiment files (package data)."""
