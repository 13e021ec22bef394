"""The ``contextsieve`` command line (:func:`contextsieve.cli.main.main`)."""
