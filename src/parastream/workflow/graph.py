"""The direction-level analysis behind ``parastream graph``: a model decomposed into modules,
verdicts, parallel points and headroom on a device profile.

Also the two loaders every model-taking workflow shares: a device profile from a name, a
path or a loaded profile (:func:`profile_of`), and a model's graph (:func:`model_graph`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from ..device.profile import DEFAULT_DEVICE, DeviceProfile, load_profile, warn_if_noted
from ..errors import InputError
from ..graph.headroom import Analysis as GraphAnalysis
from ..graph.headroom import analyze_graph
from ..graph.ir import Graph
from ..graph.models import is_graph_file, load_graph
from ..report.graph import analysis_document

#: the scale a zoo model is built at when none is given
GRAPH_SCALE = "small"


def profile_of(device: str | DeviceProfile, *, warn: bool = True) -> DeviceProfile:
    """The device profile ``device`` names (a shipped name or a .json path; an InputError
    otherwise), or ``device`` itself when it is one; with ``warn`` its note, if any, is
    said on stderr as every predicting command does."""
    profile = device if isinstance(device, DeviceProfile) else load_profile(device)
    if warn:
        warn_if_noted(profile)
    return profile


def model_graph(model: str | Graph, scale: str | None, phase: str | None,
                device: str | DeviceProfile | None) -> Graph:
    """The operator graph of ``model``: a Graph as it is, else a graph JSON file, zoo name
    or ``file.py:factory`` built at ``scale`` (default small) and ``phase``, with the device
    recorded in its meta."""
    if isinstance(model, Graph):
        return model
    if not isinstance(device, DeviceProfile):
        return load_graph(model, scale or GRAPH_SCALE, phase, device)
    graph = load_graph(model, scale or GRAPH_SCALE, phase, None)
    if not is_graph_file(model):  # as load_graph records a device it is given by name
        graph.meta["device"] = device.name
    return graph


@dataclass(frozen=True)
class GraphResult:
    """A model's decomposition on a device: the graph, its ``analysis`` (modules, verdicts,
    parallel points, headroom), the profile, and what the graph was built from."""

    graph: Graph
    analysis: GraphAnalysis
    profile: DeviceProfile
    source: str
    scale: str | None
    phase: str | None

    def to_dict(self) -> dict:
        """The ``parastream.graph-analysis/1`` document (``graph --format json``)."""
        return analysis_document(self.analysis, self.graph, self.profile, source=self.source,
                                 scale=self.scale, phase=self.phase)


def graph(model: str | Graph, *, scale: str | None = None, phase: str | None = None,
          device: str | DeviceProfile = DEFAULT_DEVICE) -> GraphResult:
    """Decompose ``model`` (zoo name, ``file.py:factory``, graph JSON path or a Graph) on
    ``device``. A graph file has its own shapes: ``scale``/``phase`` beside one is an
    InputError. An empty graph is analysed (nothing in it can run apart) with a warning."""
    profile = profile_of(device)
    is_file = isinstance(model, str) and is_graph_file(model)
    if (scale or phase) and (is_file or isinstance(model, Graph)):
        raise InputError(model_name(model), "--scale and --phase pick a zoo model's shapes; a "
                                       "graph file has its own")
    g = model_graph(model, scale, phase, device)
    if not g.ops:
        print(f"parastream: {model_name(model)}: the graph has no ops (the forward returns its "
              "input or no tensor): nothing to plan", file=sys.stderr)
    # what the graph was built at: a zoo model's first phase when none was asked for, a
    # graph file's own meta
    return GraphResult(graph=g, analysis=analyze_graph(g, profile), profile=profile,
                       source=model_name(model), scale=g.meta.get("scale"),
                       phase=g.meta.get("phase"))


def model_name(model: str | Graph) -> str:
    """How errors and reports name ``model``: the spec as given, or a Graph's name."""
    return model.name if isinstance(model, Graph) else model


__all__ = ["GRAPH_SCALE", "GraphResult", "graph", "model_graph", "model_name", "profile_of"]
