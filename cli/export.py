"""`sitsprof export`: a Prometheus endpoint with dcgm-exporter-style GPU gauges."""
from __future__ import annotations

import click


@click.command("export")
@click.option("--port", type=int, default=9400, show_default=True, help="TCP port (dcgm-exporter's default).")
@click.option("--bind", default="127.0.0.1", show_default=True, help="Address to listen on (0.0.0.0 for all).")
@click.option("--gpm/--no-gpm", default=True, show_default=True, help="Also export GPM ratios where supported.")
def export(port: int, bind: str, gpm: bool) -> None:
    """Serve NVML (and GPM) gauges at http://BIND:PORT/metrics until interrupted."""
    import threading

    from sitsprof.collectors.exporter import serve

    server, collector = serve(port, bind, gpm=gpm)
    click.echo(f"sitsprof: serving metrics on http://{bind}:{server.server_port}/metrics (Ctrl-C to stop)", err=True)
    try:
        threading.Event().wait()
    finally:
        server.shutdown()
        collector.close()


COMMANDS = [export]
