"""``python -m fundamentallm.course ...``: see :func:`fundamentallm.course.main`."""

import sys

from . import main

sys.exit(main())
