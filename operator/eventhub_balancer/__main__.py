"""`python -m eventhub_balancer` is `ehb`."""

import sys

from eventhub_balancer.cli import main

sys.exit(main())
