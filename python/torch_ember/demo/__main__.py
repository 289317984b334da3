from .train_lm import main

raise SystemExit(main())
