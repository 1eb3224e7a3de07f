import sys

from kinematic_pipeline.cli import main

sys.exit(main())
