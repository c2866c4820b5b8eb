from lavinmq.cli import main

raise SystemExit(main())
