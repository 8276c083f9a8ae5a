"""``python -m calibrate.nccl_tests``."""

from calibrate.nccl_tests.parser import main

raise SystemExit(main())
