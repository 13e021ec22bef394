"""``python -m contextsieve`` = the ``contextsieve`` command."""

from contextsieve.cli import main

raise SystemExit(main())
