"""Video files in and out: a streaming H.264 writer and reader, probe and join, through ffmpeg."""

from videogen.io.video import VideoIOError, VideoReader, VideoWriter, check_output_path, concat_videos, probe

__all__ = ["VideoIOError", "VideoReader", "VideoWriter", "check_output_path", "concat_videos", "probe"]
