"""``parastream zoo`` (list the built-in models) and ``parastream calibrate`` (measure the
local CPU into a device profile). Loaded by :mod:`parastream.cli`; torch is imported only
when a command runs."""

from __future__ import annotations

import argparse
import sys

from ..errors import InputError
from ..runtime.backend import backend_capabilities, torch_device_name


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``zoo`` and ``calibrate`` subcommands."""
    from .args import format_arg, output_arg

    z = sub.add_parser("zoo", help="list the built-in models",
                       description="List the built-in models, one line each: name, phases, "
                                   "what it is. Use a name wherever a model is expected; "
                                   "every model has the scales tiny, small and 7b.")
    format_arg(z, ("text", "json"))
    z.set_defaults(func=cmd_zoo)

    c = sub.add_parser("calibrate", help="measure this CPU (or a cuda GPU) and write a device "
                                         "profile",
                       description="Measure the local CPU (matmul and vector throughput, "
                                   "memory bandwidth, per-task hand-off overhead, cores) and "
                                   "write a parastream.device/1 profile; use it with "
                                   "--device FILE. With --device cuda, measure the GPU "
                                   "(matmul rates, copy bandwidth, multiprocessors) and the "
                                   "executor's host cost per op and per call there, on top "
                                   "of the shipped profile of that GPU.")
    c.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="what to calibrate (default cpu)")
    output_arg(c, "the profile", default="NAME.json")
    c.add_argument("--name", default=None, help="the profile's name (default: cpu-calibrated; "
                   "on cuda the GPU's shipped profile's name with -calibrated, e.g. "
                   "h200-calibrated)")
    c.add_argument("--quick", action="store_true", help="shorter, noisier measurements (about a third of the time)")
    c.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="calibrate N times, one after another, and keep the median of each "
                        "figure; prints how much the figures moved between them (default 1; "
                        "on a busy machine 3 keep one slow spell out of the profile; at most "
                        "10)")
    from ..cpu import malloc

    malloc.add_argument(c)
    c.set_defaults(func=cmd_calibrate)


#: most calibrations ``calibrate --repeat`` runs one after another
MAX_REPEAT = 10


def zoo_listing() -> list[dict]:
    """The zoo as plain records: name, description, phases, scales."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        raise InputError(None, "the built-in models need torch (pip install 'parastream[torch]')")
    from ..zoo import SCALES, ZOO

    return [{"name": m.name, "description": m.description, "phases": list(m.phases),
             "scales": list(SCALES)} for m in ZOO.values()]


def cmd_zoo(args: argparse.Namespace) -> int:
    """List the built-in models: one line each, or JSON records."""
    rows = zoo_listing()
    if args.format == "json":
        from ..report.graph import render_json

        sys.stdout.write(render_json(rows, indent=2))
        return 0
    width = max(len(r["name"]) for r in rows)
    pw = max(len("/".join(r["phases"])) for r in rows)
    for r in rows:
        sys.stdout.write(f"{r['name']:<{width}}  {'/'.join(r['phases']):<{pw}}  "
                         f"{r['description']}\n")
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    """Measure the local CPU (or cuda GPU) into a device profile, written to ``-o``."""
    from ..atomic import check_writable, write_atomic
    from ..calibrate.profile import dumps

    on = backend_capabilities(args.device).torch_device
    if on is not None:
        from ..runtime.cuda import require_device

        require_device(on)
        if args.name is None:
            from ..calibrate.device import calibrated_name

            args.name = calibrated_name(torch_device_name(args.device) or args.device)
    args.name = "cpu-calibrated" if args.name is None else args.name
    args.output = f"{args.name}.json" if args.output is None else args.output
    if not args.name.strip():
        raise InputError(None, "--name must not be empty")
    from ..device.profile import is_shipped

    if is_shipped(args.name):
        # a plan records its device by name: a calibrated profile under a shipped name is
        # later taken for the shipped one (simulate plan.json predicted on the wrong device)
        raise InputError(None, f"--name {args.name!r} is a shipped profile's name: pick "
                               "another (default cpu-calibrated, or NAME-calibrated on cuda)")
    if not 1 <= args.repeat <= MAX_REPEAT:
        # each calibration takes about half a minute: a mistyped count would hold the
        # machine for an hour before writing anything
        raise InputError(None, f"--repeat must be between 1 and {MAX_REPEAT}, got "
                               f"{args.repeat}")
    if not args.output.strip():
        raise InputError(None, "-o/--output must name a file")
    check_writable(args.output)  # fail before spending seconds measuring
    from ..cpu import malloc
    from ..cpu.overhead import calibrate_cpu

    print(f"parastream calibrate: {malloc.apply(args.malloc)}", file=sys.stderr)
    if on is not None:
        from ..calibrate.device import calibrate_repeated

        profile = calibrate_repeated(args.device, quick=args.quick, name=args.name,
                                     repeat=args.repeat)
    else:
        # with torch, the cpu backend's executor costs too (what run and demo predict with)
        profile = calibrate_cpu(quick=args.quick, name=args.name, repeat=args.repeat,
                                warn=lambda note: print(f"parastream calibrate: {note}",
                                                        file=sys.stderr))
    data = dumps(profile)
    if args.repeat > 1:  # how far this machine's figures moved between the calibrations
        print(f"parastream calibrate: {profile['sources']['repeat'].split(': ', 1)[1]}",
              file=sys.stderr)
    write_atomic(args.output, data)
    sys.stdout.write(data.decode())
    print(f"wrote {args.output}", file=sys.stderr)
    return 0
