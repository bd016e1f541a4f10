# Sourced by the CLI tests whose expectations depend on where the launcher
# puts the ranks: shared memory within a node, Open MPI across nodes (the TCP
# run of the suite, tcp_namespaces_test.sh, spreads ranks over two nodes).
# on_one_node MPIEXEC NP: succeeds when all NP ranks share one node, as Open
# MPI tells each process (OMPI_COMM_WORLD_LOCAL_SIZE), not colrow's own view.
on_one_node() {
  sizes=$(timeout 60 "$1" -np "$2" --oversubscribe --bind-to none --quiet \
    sh -c 'echo "${OMPI_COMM_WORLD_LOCAL_SIZE:-1}"' | sort -u)
  [ "$sizes" = "$2" ]
}

# drop_launcher_noise FILE: removes, in place, the one warning Open MPI's rsh
# launcher (the TCP run's) prints when it loses a benign race with the agent
# it forked ("plm:rsh: Warning: setpgid(...) failed in parent with
# errno=Permission denied"), so that tests counting a rank's error lines see
# colrow's lines only.
drop_launcher_noise() {
  grep -v 'plm:rsh: Warning: setpgid(' "$1" > "$1.kept" || true
  mv "$1.kept" "$1"
}
