"""Framework callbacks, imported on use so that neither framework is needed
to import trainperf:

    trainperf.integrations.LightningCallback   -> trainperf.lightning.TrainperfCallback
    trainperf.integrations.HFCallback          -> trainperf.hf.TrainperfCallback
"""

__all__ = ["LightningCallback", "HFCallback", "HuggingFaceCallback"]


def __getattr__(name):
    if name == "LightningCallback":
        from .lightning import TrainperfCallback
        return TrainperfCallback
    if name in ("HFCallback", "HuggingFaceCallback"):
        from .hf import TrainperfCallback
        return TrainperfCallback
    raise AttributeError(name)
