import os
import sys

# Lets the tests import reference_plan.py next to them.
sys.path.insert(0, os.path.dirname(__file__))
