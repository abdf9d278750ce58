"""Code generated from proto/ by scripts/generate.sh. DO NOT EDIT."""
