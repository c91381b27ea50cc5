"""``python -m seeder``: the seeder command."""
from .cli import main

raise SystemExit(main())
