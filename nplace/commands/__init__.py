"""The command line: `main` dispatches `nplace COMMAND`, `flags` parses and documents every
command's flags, and each other module is the command of its name.

Rule: commands may import any part of nplace; the library never imports this package."""
