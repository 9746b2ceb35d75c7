"""On-policy distillation's training section: the teacher is required, and the rules TRL leaves to a traceback."""

from __future__ import annotations

from .training_section import TrainingBase


class DistillTrainingBase(TrainingBase):
    """On-policy distillation (Agarwal et al. 2024, arXiv:2306.13649) through TRL's DistillationTrainer."""

    def cross_checks(self, world_size: int = 1) -> list[tuple[str, str]]:
        out = super().cross_checks(world_size)
        v = self.value
        teacher = v("teacher_model_name_or_path")
        if not teacher:
            out.append(("training.teacher_model_name_or_path",
                        "distillation needs a teacher: the model whose next-token distribution the student learns to match, as any "
                        "model spec (a hub id, a model or adapter folder such as a posttrain run's output_dir, a .gguf file, tiny:...). "
                        "It must share the student's tokenizer, e.g. teacher_model_name_or_path: Qwen/Qwen2.5-1.5B-Instruct for a "
                        "Qwen2.5-0.5B student."))
        return out
