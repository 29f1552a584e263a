import sys

from npu.tools.cli import main

sys.exit(main())
