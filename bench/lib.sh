# Shared by the benchmark scripts (sourced, not run).
# bench_study FILE NAME ARCHITECTURE CLUSTER TRACE WORKLOAD OVERLAP [DISPATCH [FIDELITY]]: writes a
# one-variant study to FILE: contiguous placement, one timeline of policy OVERLAP; TRACE "" for none;
# DISPATCH (dispatch.mode) and FIDELITY (network.fidelity) only when given.
bench_study() {
  {
    printf 'schema_version: 1\nkind: study\nname: %s\nbase:\n' "$2"
    printf '  architecture: %s\n  cluster: %s\n  trace: %s\n  workload: %s\n' "$3" "$4" "${5:-none}" "$6"
    printf '  placement: {policy: contiguous}\n  overlap: {policy: %s, timelines: requested}\n' "$7"
    if [ -n "${8:-}" ]; then printf '  dispatch: {mode: %s}\n' "$8"; fi
    if [ -n "${9:-}" ]; then printf '  network: {fidelity: %s%s}\n' "$9" "${10:+, tolerance: ${10}}"; fi
  } > "$1"
}
