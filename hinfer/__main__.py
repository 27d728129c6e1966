import sys

from hinfer.cli.main import main

sys.exit(main())
