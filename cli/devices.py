"""`sitsprof devices`: GPU facts and what sitsprof can measure on each GPU."""
from __future__ import annotations

import click

from sitsprof.common import jsonout

__all__ = ["COMMANDS", "devices"]


def _mib(value) -> str:
    return "-" if value is None else f"{value / 2**20:,.0f} MiB"


@click.command("devices")
@click.option("--json", "as_json", is_flag=True, help="Print the facts as JSON.")
@click.option("--counters", "show_counters", is_flag=True,
              help="Also list every catalog counter and whether it reads here.")
@click.option("--device", "device", type=int, default=None, help="Only this GPU index.")
def devices(as_json: bool, show_counters: bool, device: int | None) -> None:
    """GPU facts (name, UUID, clocks, L2, memory...) plus capabilities: clock locking, GPM, CUPTI PM sampling."""
    from sitsprof.pmu.capabilities import device_entries

    if as_json:
        # A fleet script reads stdout as JSON even when there is no GPU or driver: the error as an
        # object ({"error", "type", "devices": []}) with the same exit status as the one-line error.
        try:
            entries = device_entries(device)
        except Exception as exc:  # noqa: BLE001 - only errors meant for the user (an exit_code) are turned
            code = getattr(exc, "exit_code", None)
            if not isinstance(code, int) or isinstance(code, bool):
                raise
            click.echo(jsonout.dumps({"error": str(exc), "type": type(exc).__name__, "devices": []}, indent=2))
            raise  # main's one line on stderr and the exit status
        click.echo(jsonout.dumps(entries, indent=2))
        return
    entries = device_entries(device)
    from rich.console import Console
    from rich.table import Table

    console = Console()
    for facts in entries:
        caps = facts["capabilities"]
        clocks = facts["clocks"]
        table = Table(title=f"GPU {facts['index']}: {facts['name']}", show_header=False)
        rows = [
            ("UUID", facts["uuid"]), ("PCI bus id", facts["pci_bus_id"]),
            ("compute capability", facts["compute_capability"]),
            ("SMs", str(facts["sm_count"])), ("L2", _mib(facts["l2_bytes"])),
            ("memory", f"{_mib(facts['memory_bytes'])}, {facts['bus_width_bits']}-bit bus"),
            ("driver / CUDA", f"{facts['driver']} / {facts['cuda']}"),
            ("SM clock", f"{clocks['sm_mhz']} MHz now, max {clocks['sm_max_mhz']}, base {clocks['sm_base_mhz']}"),
            ("memory clock", f"{clocks['memory_mhz']} MHz now, supported {clocks['supported_memory_mhz']}"),
            ("clock event reasons", ", ".join(facts["clock_event_reasons"] or []) or "none"),
            ("clock locking", ("yes: " if caps["clock_lock"]["possible"] else "no: ") + caps["clock_lock"]["reason"]),
            ("clock lock on this card", caps["clock_locking"]["summary"]),
            ("GPM", ("yes" if caps["gpm"]["supported"] else "no: " + caps["gpm"]["reason"])),
            ("CUPTI PM sampling", ("yes: " if caps["cupti_pm_sampling"]["available"] else "no: ")
             + caps["cupti_pm_sampling"]["reason"]),
        ]
        for key, value in rows:
            table.add_row(key, str(value))
        console.print(table)
        if show_counters:
            counters = Table(title="counters")
            for column in ("name", "backend", "unit", "min interval", "readable"):
                counters.add_column(column)
            notes = []
            for c in caps["counters"]:
                interval = "-" if c["min_interval_s"] is None else f"{c['min_interval_s']:g} s"
                counters.add_row(c["name"], c["backend"], c["unit"], interval, "yes" if c["readable"] else "no")
                if not c["readable"]:
                    notes.append(f"{c['name']}: {c['reason']}")
            console.print(counters)
            for note in notes:
                console.print(f"  {note}", highlight=False)


COMMANDS = [devices]
