"""`python -m benchmarks` (`make bench`): the whole suite; see benchmarks/suite.py."""

import sys

from benchmarks.suite import main

if __name__ == "__main__":
    sys.exit(main())
