"""`sitsprof compile`: compile the policy kernels now (on the cores there are), so no later run waits."""
from __future__ import annotations

import click

from sitsprof.common import jsonout

__all__ = ["COMMANDS", "compile_cmd"]


@click.command("compile")
@click.option("--policy", "-p", "policy_text", default="all", show_default=True,
              help="Comma-separated policies whose kernels to compile, or 'all'.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None,
              help="Worker processes compiling at once (default: every core on 3 cores or more, else 1; "
                   "at most one per policy).")
@click.option("--json", "as_json", is_flag=True, help="Print what was compiled as JSON.")
@click.option("--aot", is_flag=True,
              help="Also compile the streamed `policy simulate` kernels ahead of time into one extension module "
                   "(numba.pycc; needs a C compiler, ~15 s of CPU), so a large trace streams without importing "
                   "numba: ~0.3 s less start-up (bench/README.md). Used only while its kernels' source is unchanged.")
def compile_cmd(policy_text: str, jobs: int | None, as_json: bool, aot: bool = False) -> None:
    """Compile (or, when cached, load) the numba kernels the policy commands use: a first
    `policy simulate` and `policy replay` (the serving replay's kernels, sits's --threshold path)
    then start warm. numba keeps them in one per-user cache (printed);
    `make demo` and `make test` run this once."""
    from sitsprof.policies.engine.compiling import FIRST_RUN_NOTE
    from sitsprof.policies.precompile import precompile

    def note(text: str) -> None:
        click.echo(f"sitsprof: {FIRST_RUN_NOTE}: {text}", err=True)

    built = None
    if aot:  # first: only the streamed path's kernels have run in this process, and only they are built
        from .aotbuild import build_aot

        built = build_aot(policy_text, note)
    done = precompile(policy_text, jobs=jobs, note=note)
    if built is not None:
        done["aot"] = built
    if as_json:
        click.echo(jsonout.dumps(done, indent=2))
        return
    click.echo(f"sitsprof: {len(done['policies'])} policies and the serving replay ready: {done['compiles']} "
               f"kernel(s) compiled in "
               f"{done['seconds']:.1f} s on {done['jobs']} process(es); cache {done['cache']}", err=True)


COMMANDS = [compile_cmd]
