"""Code generated from proto/aion/v1 by scripts/generate.sh. DO NOT EDIT."""
