"""The examples, shipped in the wheel as `nnapi.examples`: the main job (`python -m nnapi.examples.main_job`,
what `make run` runs) and the model it uses (MediaPipe's short-range face detector, see models/NOTICE)."""
import os

#: The folder of the example models.
MODELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models")
#: MediaPipe's short-range face detector (float32 input [1, 128, 128, 3], two outputs).
FACE_DETECTION = os.path.join(MODELS, "face_detection_short_range.tflite")
