"""Plan reports now live in :mod:`parastream.report.plan`; these names stay importable
from here for existing callers."""

from ..report.plan import (NOT_MEASURED, PATHS, SYNC_API, fragment, measured_text,  # noqa: F401
                           render_markdown, render_text, strength_text, sync_text)
