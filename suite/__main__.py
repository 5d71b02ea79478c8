"""`python -m suite COMMAND`: runs suite/cli.py's main and exits with its status."""

from suite.cli import main

raise SystemExit(main())
