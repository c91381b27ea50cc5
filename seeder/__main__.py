"""``python -m seeder``: the seeder command."""

from seeder._cli import main

raise SystemExit(main())
