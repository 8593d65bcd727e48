"""`sitsprof clocks show|lock|reset`: look at, pin and restore GPU clocks."""
from __future__ import annotations

import json

import click

_SPEC_HELP = "max, base (default applications clock), tdp (NVML_CLOCK_LIMIT_ID_TDP) or MHz"


@click.group("clocks")
def clocks() -> None:
    """Show, lock or reset GPU clocks (locking needs root)."""


@clocks.command("show")
@click.option("--device", type=int, default=0, show_default=True, help="GPU index.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def show(device: int, as_json: bool) -> None:
    """Current, max and base clocks, supported values, event reasons and sitsprof's lock records."""
    from sitsprof.pmu.clocks import clock_status

    facts = clock_status(device)
    if as_json:
        click.echo(json.dumps(facts, indent=2))
        return
    sm = facts["supported_sm_mhz"]
    click.echo(f"GPU {device}")
    click.echo(f"  SM clock      {facts['sm_mhz']} MHz (max {facts['sm_max_mhz']}, base {facts['sm_base_mhz']}; "
               f"supported {sm[-1] if sm else '-'}..{sm[0] if sm else '-'} MHz, {len(sm)} steps)")
    click.echo(f"  memory clock  {facts['memory_mhz']} MHz (supported: {', '.join(map(str, facts['supported_memory_mhz']))})")
    click.echo(f"  event reasons {', '.join(facts['event_reasons'] or []) or 'none'}")
    for record in facts["locks"]:
        state = "STALE (its process is gone)" if record["stale"] else ("locked by `sitsprof clocks lock`"
                                                                       if record.get("persistent") else f"held by pid {record['pid']}")
        click.echo(f"  lock record   {record['resolved']} since {record.get('locked_at')}: {state}")


@clocks.command("lock")
@click.option("--device", type=int, default=0, show_default=True, help="GPU index.")
@click.option("--sm", default="max", show_default=True, help=f"SM clock: {_SPEC_HELP}.")
@click.option("--memory", default=None, help="Memory clock: max, base or MHz (default: leave alone).")
def lock(device: int, sm: str, memory: str | None) -> None:
    """Lock clocks until `sitsprof clocks reset` (runs lock and restore on their own with --clocks lock)."""
    from sitsprof.pmu.clocks import lock_persistent

    done = lock_persistent(device, sm=sm, memory=memory)
    click.echo(f"GPU {device}: locked {done['resolved']}; now SM {done['applied']['sm_mhz']} MHz, "
               f"memory {done['applied']['memory_mhz']} MHz (undo: sitsprof clocks reset)")


@clocks.command("reset")
@click.option("--device", type=int, default=None, help="GPU index (default: GPUs sitsprof locked, else all).")
def reset(device: int | None) -> None:
    """Reset locked SM and memory clocks to the driver default and drop sitsprof's lock records."""
    from sitsprof.pmu.clocks import reset_clocks

    for done in reset_clocks(device):
        note = " (it had been left locked by sitsprof)" if done["record"] else ""
        click.echo(f"GPU {done['index']} ({done['uuid']}): clocks reset to the driver default{note}")


COMMANDS = [clocks]
