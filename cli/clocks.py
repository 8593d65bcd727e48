"""`sitsprof clocks show|lock|reset`: look at, pin and restore GPU clocks."""
from __future__ import annotations

import click

from sitsprof.common import jsonout

__all__ = ["COMMANDS", "clocks", "lock", "reset", "show"]

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
        click.echo(jsonout.dumps(facts, indent=2))
        return
    sm = facts["supported_sm_mhz"]
    click.echo(f"GPU {device}")
    click.echo(f"  SM clock      {facts['sm_mhz']} MHz (max {facts['sm_max_mhz']}, base {facts['sm_base_mhz']}; "
               f"supported {sm[-1] if sm else '-'}..{sm[0] if sm else '-'} MHz, {len(sm)} steps)")
    supported = ", ".join(map(str, facts["supported_memory_mhz"]))
    click.echo(f"  memory clock  {facts['memory_mhz']} MHz (supported: {supported})")
    click.echo(f"  event reasons {', '.join(facts['event_reasons'] or []) or 'none'}")
    click.echo(f"  clock locking {facts['clock_locking']['summary']}")
    for record in facts["locks"]:
        click.echo(f"  lock record   {_describe(record)}")
    for record in facts["absent_gpu_locks"]:
        gpu = f"is for GPU {record['uuid']}, which is not on this node" if record.get("uuid") else \
            "names no GPU on this node"
        damaged = f" is DAMAGED ({record['problem']}) and" if record["state"] == "damaged" else ""
        click.echo(f"  lock record   {record['path']}{damaged} {gpu}: `sitsprof clocks reset` removes it")
    from sitsprof.pmu.lockstate import describe_holder, other_host_records

    for record in other_host_records():
        click.echo(f"  lock record   {record['path']} was written on host {record['host']}, not this one "
                   f"({describe_holder(record)}); left alone: remove it by hand if that host is this machine "
                   "under another name")


def _describe(record: dict) -> str:
    """One lock record as `clocks show` prints it: what it claims, and whether NVML agrees."""
    from sitsprof.pmu import lockstate

    state = record["state"]
    if state == lockstate.DAMAGED:
        return f"{record['path']} is DAMAGED ({record['problem']}): `sitsprof clocks reset` removes it"
    text = {lockstate.STALE: "STALE (its process is gone)",
            lockstate.LOCKED: "locked by `sitsprof clocks lock`",
            lockstate.HELD: f"held by pid {record['pid']} ({lockstate.describe_holder(record)})",
            lockstate.DROPPED: f"DROPPED by the driver, no longer held: {record['problem']}"}[state]
    if record.get("in_effect") is True:
        text += "; NVML shows the clocks at the recorded values"
    elif record.get("in_effect") is False:
        text += "; NVML shows other clocks now, so the lock is not in effect"
    return f"{record.get('resolved')} since {record.get('locked_at')}: {text}"


@clocks.command("lock")
@click.option("--device", type=int, default=0, show_default=True, help="GPU index.")
@click.option("--sm", default="max", show_default=True, help=f"SM clock: {_SPEC_HELP}.")
@click.option("--memory", default=None, help="Memory clock: max, base or MHz (default: leave alone).")
@click.option("--replace", is_flag=True, help="Lock over an earlier `clocks lock` (refused without it).")
def lock(device: int, sm: str, memory: str | None, replace: bool) -> None:
    """Lock clocks until `sitsprof clocks reset` (runs lock and restore on their own with --clocks lock)."""
    from sitsprof.pmu.clocks import lock_persistent

    done = lock_persistent(device, sm=sm, memory=memory, replace=replace)
    click.echo(f"GPU {device}: locked {done['resolved']}; now SM {done['applied']['sm_mhz']} MHz, "
               f"memory {done['applied']['memory_mhz']} MHz (undo: sitsprof clocks reset)")
    if done["clock_locking"]["lock_survives_process"] is False:
        click.echo(f"sitsprof: warning: persistence mode is off on GPU {device}: the driver drops this lock when "
                   "the last process using the GPU exits (now, unless another one has it open); "
                   f"`nvidia-smi -i {device} -pm 1` keeps it", err=True)


@clocks.command("reset")
@click.option("--device", type=int, default=None, help="GPU index (default: GPUs sitsprof locked, else all).")
@click.option("--force", is_flag=True, help="Also reset clocks a running sitsprof run holds (it records that).")
def reset(device: int | None, force: bool) -> None:
    """Reset locked SM and memory clocks to the driver default and drop sitsprof's lock records
    (damaged ones and those of GPUs no longer here included)."""
    from sitsprof.pmu.clocks import reset_clocks

    for done in reset_clocks(device, force=force):
        click.echo(_reset_line(done))


def _reset_line(done: dict) -> str:
    from sitsprof.pmu import lockstate

    record, path = done["record"], done["path"]
    state = record["state"] if record else None
    if state is None:
        note = ""
    elif done["taken_over"]:
        note = (f" (it was held by a running sitsprof run, {lockstate.describe_holder(record)}; "
                "that run will record that its lock was reset)")
    elif state == lockstate.DAMAGED:
        note = f" (removed its damaged lock record {path}: {record['problem']})"
    elif state == lockstate.DROPPED:
        note = f" (removed its lock record, which no longer held: {record['problem']})"
    else:
        note = " (it had been left locked by sitsprof)"
    if done.get("note") and done["index"] is not None:
        note += f" ({done['note']})"
    if done["remove_error"]:
        note += f"; could not remove {path}: {done['remove_error']}"
    if done["index"] is not None:
        return f"GPU {done['index']} ({done['uuid']}): clocks reset to the driver default{note}"
    if done["taken_over"]:
        return (f"GPU {done['uuid']} is not on this node, yet a running sitsprof run holds its lock record {path} "
                f"({lockstate.describe_holder(record)}); marked it as reset")
    if state == lockstate.DAMAGED and not done["uuid"]:
        head = f"removed damaged lock record {path} ({record['problem']}), which names no GPU on this node"
    else:
        head = (f"GPU {done['uuid']} is not on this node: could not restore its clocks; "
                f"removed its lock record {path}")
    if done["remove_error"]:
        head = head.replace("removed", "could not remove", 1) + f" ({done['remove_error']})"
    return head


COMMANDS = [clocks]
