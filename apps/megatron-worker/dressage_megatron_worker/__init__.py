"""TrainerService for GPU clusters: receives packed TrainBatches over gRPC and trains Megatron through
slime's training actor. Megatron, slime, torch and Ray are imported lazily, only by the slime actor."""

__all__ = ["__version__"]

__version__ = "0.1.0"
