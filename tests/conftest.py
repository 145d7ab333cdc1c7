"""Shared fixtures: every test gets a fresh in-memory store and clean dispatch state."""
from __future__ import annotations

import contextlib

import numpy as np
import pytest

from arbiter import dispatch, env
from arbiter.store import MemoryStore


@pytest.fixture(autouse=True)
def fresh_state(monkeypatch, tmp_path):
    monkeypatch.delenv("ARBITER_POLICY", raising=False)
    monkeypatch.setenv("ARBITER_DB", str(tmp_path / "registry.db"))
    dispatch.configure(store=MemoryStore())
    dispatch.reset()
    yield
    dispatch.reset()
    env.reset()


def pytest_terminal_summary(terminalreporter):
    """The skipped tests as one line per reason, with its count (pytest's ``-rs`` prints a line per test function
    and location: about 190 lines here, most of them "no NVIDIA GPU"). ``-rs`` still lists them all."""
    skipped = terminalreporter.stats.get("skipped", [])
    if not skipped or "s" in (terminalreporter.config.option.reportchars or ""):
        return
    reasons: dict[str, int] = {}
    for report in skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        reason = reason.removeprefix("Skipped: ")
        reasons[reason] = reasons.get(reason, 0) + 1
    terminalreporter.write_line(f"{len(skipped)} skipped, for {len(reasons)} reason(s) (-rs lists each test):")
    for reason, n in sorted(reasons.items(), key=lambda item: -item[1]):
        terminalreporter.write_line(f"  {n:4d}  {' '.join(reason.split())[:200]}")


def pytest_sessionfinish(session, exitstatus):
    """A PostgreSQL server the store tests started for this session stops with it (issue 29, item 9)."""
    from store_support import stop_started_server

    stop_started_server()


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` skip cleanly where no NVIDIA GPU with CuPy is present (CI has none)."""
    from gpu_support import gpu_available

    if gpu_available():
        return
    skip = pytest.mark.skip(reason="no NVIDIA GPU with CuPy here")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def only_candidates():
    """``only_candidates("cpu", "matmul", c1, c2)``: exactly these candidates for (target, op) during a test."""
    from arbiter.candidates import REGISTRY

    with contextlib.ExitStack() as scopes:  # closed in reverse: the registered candidates come back last
        yield lambda target, op, *candidates: scopes.enter_context(REGISTRY.only(target, op, candidates))


# The heavy tests (issue 41 item 4): each took 8-67 s on this 2-core box (``--durations``, four workers), most of it
# fresh Python processes (CLI runs, registry trust, bad rows, signals, workers, fresh imports) or whole-suite gates.
# The README's command skips them; `.ci/run`'s second step runs them on four workers (``pytest -n 4 -m heavy``).
# Each class keeps a short version in the default run: a fresh-process registry-trust test
# (``test_a_registry_of_ones_own_is_opened_and_its_verdicts_trusted``), a bad row ([sqlite-params='not json']),
# the identity-drift check on one problem per op (``test_one_gate_per_builtin_leaves_its_identity_unchanged``),
# the CLI through Typer's runner in the CLI test files; the benchmark scripts' are in test_benchmark_smoke.py.
HEAVY: dict[str, tuple[str, ...]] = {
    "store/test_bad_rows.py": (
        "test_a_solution_row_that_does_not_decode_is_decided_again_not_raised",
        "test_a_verdict_and_a_measurement_that_do_not_decode_are_gated_and_timed_again",
        "test_doctor_names_an_unreadable_row_and_repair_drops_it_alone",
    ),
    "store/test_fleet_commands.py": (
        "test_from_recorded_with_workers_tunes_the_recorded_keys",
    ),
    "store/test_full_disk_open.py": (
        "test_a_process_starting_on_a_full_disk_serves_the_registry_read_only",
    ),
    "store/test_registry_trust.py": (
        "test_a_flipped_verdict_never_serves_the_candidate_the_gate_failed",
        "test_a_registry_exported_and_imported_again_stays_usable",
        "test_a_registry_of_another_user_is_refused_even_for_root_unless_named",
        "test_following_the_refusals_advice_does_not_make_a_tampered_registry_trusted",
        "test_on_a_server_a_flipped_verdict_is_gated_again_and_doctor_names_it",
    ),
    "store/test_setting_messages.py": (
        "test_a_url_whose_scheme_or_driver_is_missing_names_the_setting_and_the_fix",
        "test_stats_pending_shows_a_failed_key_as_failed_and_how_to_retry",
    ),
    "store/test_tune_commit.py": (
        "test_a_tuner_killed_while_writing_the_solution_leaves_the_key_untuned_not_half_tuned",
    ),
    "store/test_tune_signals.py": (
        "test_a_key_held_by_a_live_lease_is_waited_for_not_skipped",
        "test_a_tuner_signalled_mid_key_releases_its_claim_and_the_rerun_tunes_every_key",
    ),
    "test_base_install.py": (
        "test_candidates_needing_an_extra_are_unavailable_with_the_install_hint",
        "test_every_op_is_served_without_the_extras",
    ),
    "test_cli_conventions.py": (
        "test_a_missing_registry_and_an_unknown_op_exit_non_zero_naming_themselves",
        "test_doctor_lines_fit_80_columns",
        "test_export_dash_explain_key_and_json_of_tune_and_doctor",
        "test_tune_shows_a_progress_bar_on_a_terminal",
    ),
    "test_cli_newcomer.py": (
        "test_a_command_that_writes_the_registry_refuses_to_run_into_memory",
        "test_explain_prints_a_reason_shared_by_parameter_sets_once",
        "test_the_tune_bar_says_which_phase_a_key_is_in",
    ),
    "test_cli_output.py": (
        "test_db_is_taken_after_the_command_as_well_as_before",
        "test_explain_prints_names_reasons_and_errors_with_brackets",
        "test_import_conflicts_print_names_with_brackets",
        "test_list_env_and_help_keep_their_brackets",
        "test_piped_output_follows_columns_and_is_wide_without_it",
        "test_stats_prints_keys_and_names_with_brackets_whole",
        "test_tune_note_says_who_is_faster_and_whether_it_is_separated",
        "test_tune_without_a_terminal_prints_a_line_per_key_and_per_slow_solution",
    ),
    "test_cli_tune.py": (
        "test_tune_then_a_new_process_hits_the_stored_solution",
    ),
    "test_cpu_threads.py": (
        "test_import_arbiter_asks_numba_for_the_workqueue_layer_and_sets_no_openmp_policy",
        "test_import_arbiter_leaves_torch_openmp_alone",
        "test_threading_layer_and_wait_policy_are_fields_of_the_environment_key",
        "test_tuning_on_a_busy_machine_says_so",
    ),
    "test_examples.py": (
        "test_custom_candidate_example_runs",
    ),
    "test_fuzz.py": (
        "test_fuzz_matmul",
        "test_fuzz_rmsnorm",
        "test_fuzz_softmax",
    ),
    "test_gate_depth.py": (
        "test_cli_tune_allow_looser_tunes_the_consenting_key",
        "test_gate_memory_on_first_call_is_bounded",
        "test_running_every_builtin_leaves_its_identity_unchanged",
    ),
    "test_issue28_minor.py": (
        "test_a_note_with_terminal_escapes_is_shown_escaped",
        "test_an_import_with_dims_outside_the_keys_bucket_is_refused",
        "test_the_region_memo_is_bounded_by_memory_when_batch_sizes_vary",
    ),
    "test_lint.py": (
        "test_mypy_finds_nothing_in_arbiter",
    ),
    "test_parallel.py": (
        "test_a_worker_that_dies_loses_only_its_key_which_is_retried",
        "test_two_workers_tune_every_key_once_into_one_registry",
    ),
    "test_plugin_isolation.py": (
        "test_a_hanging_and_a_crashing_plugin_fail_their_gate_and_the_caller_is_served",
        "test_arbiter_tune_without_isolate_survives_them_too",
    ),
    "test_switches.py": (
        "test_verbose_prints_each_decision_once",
    ),
    "test_torch.py": (
        "test_a_module_using_the_ops_compiles_with_fullgraph_and_dispatches_at_run_time",
        "test_torch_example_runs",
    ),
    "test_torch_fakes.py": (
        "test_each_op_compiles_with_fullgraph_on_strided_inputs",
    ),
}
LIGHT = ("store/test_bad_rows.py::test_a_solution_row_that_does_not_decode_is_decided_again_not_raised"
         "[sqlite-params='not json']",)


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by mark
def pytest_itemcollected(item):
    """Mark the tests of ``HEAVY`` (every parameter set of each, but those in ``LIGHT``) ``heavy``."""
    path, _, name = item.nodeid.removeprefix("tests/").partition("::")
    if name.split("[")[0] in HEAVY.get(path, ()) and f"{path}::{name}" not in LIGHT:
        item.add_marker(pytest.mark.heavy)
