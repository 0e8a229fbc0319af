"""What the commands print for people and tools, built from engine data."""
