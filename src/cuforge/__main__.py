from cuforge.cli import main

raise SystemExit(main())
