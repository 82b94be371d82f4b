"""`python3 -m kmemscope.capture ...` and the zipapp both start here."""
import sys

from kmemscope.capture.command import main

sys.exit(main(sys.argv[1:]))
