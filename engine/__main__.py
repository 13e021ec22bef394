"""``python -m contextsieve`` = the ``contextsieve`` command."""

from contextsieve.cli.main import main

raise SystemExit(main())
