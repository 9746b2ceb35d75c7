"""Subcommands beyond training, each a module with `add_parser(subparsers)`; imports stay light."""
