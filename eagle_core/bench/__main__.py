import sys

from .run import main

try:
    sys.exit(main())
except KeyboardInterrupt:
    sys.exit(130)
