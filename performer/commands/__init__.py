"""`performer train` and `performer eval`: command modules like the others (NAME, SUMMARY,
DESCRIPTION, FLAGS, main), above train/ and configurables.py, which they join."""
