"""Graph tests share the hand-built graphs of ``shapes.py`` (importable as ``shapes``)."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
