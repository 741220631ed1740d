"""Property tests: arbitrary input through every REST route and every CLI subcommand."""
