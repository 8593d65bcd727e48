"""`sitsprof export`: a Prometheus endpoint with dcgm-exporter-style GPU gauges."""
from __future__ import annotations

import click

__all__ = ["COMMANDS", "export"]


@click.command("export")
@click.option("--port", type=int, default=9400, show_default=True, help="TCP port (dcgm-exporter's default).")
@click.option("--bind", default="127.0.0.1", show_default=True, help="Address to listen on (0.0.0.0 for all).")
@click.option("--gpm/--no-gpm", default=True, show_default=True, help="Also export GPM ratios where supported.")
def export(port: int, bind: str, gpm: bool) -> None:
    """Serve NVML (and GPM) gauges at http://BIND:PORT/metrics until interrupted."""
    from sitsprof.collectors.exporter import serve_until_interrupted
    from sitsprof.common.httpserve import exposure_warning, url

    def ready(actual: int) -> None:
        click.echo(f"sitsprof: serving metrics on {url(bind, actual)} (Ctrl-C to stop)", err=True)
        warning = exposure_warning(bind)
        if warning:
            click.echo(warning, err=True)

    serve_until_interrupted(port, bind, gpm=gpm, on_ready=ready)


COMMANDS = [export]
