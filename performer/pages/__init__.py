"""The results pages: templates whose every number is read from a committed file when rendered."""
