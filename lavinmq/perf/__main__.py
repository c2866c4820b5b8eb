from lavinmq.perf.cli import main

raise SystemExit(main())
