"""Renderers: turn timelines and their analysis into files people open (HTML, Perfetto JSON)."""
