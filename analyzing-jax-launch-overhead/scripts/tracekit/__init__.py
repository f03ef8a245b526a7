"""The platform the three skills share, standard library only: the command line, errors and exit
codes of every step (`step_cli`, on `base`: the error type and the progress lines, which import
nothing from the bundle, so that no import circles back), the scratch folder's declarations,
writers and readers (`scratch`), finding a capture's files (`capture_inputs`), reading its trace
(`trace_reader`), the one record of a GPU event (`events`), the classification rules
(`trace_rules`), what the trust list reads of step 1's rows.csv (`row_facts`), and the pass over
the hosts of a run (`per_host`, `cross_host`, `cluster_hosts`). An entry script puts the folder
above this package on sys.path (its one bootstrap line) and imports these modules by name:
`from tracekit import scratch`."""
