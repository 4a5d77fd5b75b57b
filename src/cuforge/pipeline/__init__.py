"""Planning and running a build: the plan (``plan.make_plan``), its dry run, the executor that
runs it (scheduling, where each wheel comes from, the verification gate), the build kinds
(``builders/``), sources, keys, compile slots and the compiler cache."""
