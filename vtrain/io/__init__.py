"""File helpers every layer may use: the one CSV writer (tables.py), strict JSON (jsonio.py), figures
(figure.py), file locks and SQLite's WAL mode (locks.py, sqlite_wal.py), and the scripts' argument parser
(args.py: a bad argument is one line, exit 2). It imports nothing of vtrain but ``vtrain.errors``."""
