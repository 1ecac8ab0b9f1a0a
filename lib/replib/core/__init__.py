"""replib.core: profiles, seeding, device, plotting style, progress bars, the claims ledger and the
generated-data cache."""

from .data import cached_dataset
from .display import progress, set_style, show_source
from .ledger import Ledger
from .paths import chapter_slugs, load_chapter
from .profiles import PROFILES, configure, resolve_profile
from .runtime import device, model_device, seed_everything

__all__ = ["PROFILES", "Ledger", "cached_dataset", "chapter_slugs", "configure", "device", "load_chapter",
           "model_device", "progress", "resolve_profile", "seed_everything", "set_style", "show_source"]
