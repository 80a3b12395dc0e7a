"""The command line: `main` dispatches `nplace COMMAND`, `flags` parses and documents every
command's flags, and each other module is the command of its name. The library never imports
this package."""
