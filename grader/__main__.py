"""``python -m grader ...``: the command line lives in :mod:`grader.cli.main`."""

from grader.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())
